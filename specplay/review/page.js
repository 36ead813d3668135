// The page reads fine without this: hover and focus already show a token's details. This adds
// pinning them (click, Enter), Escape to let go, and arrow keys from token to token of a column.
(() => {
  const panel = document.getElementById("pinned");
  let current = null;

  function pin(token) {
    if (current) current.classList.remove("pinned");
    current = token;
    if (!token) {
      panel.hidden = true;
      return;
    }
    token.classList.add("pinned");
    panel.querySelector("pre").textContent = token.dataset.tip;
    panel.hidden = false;
  }

  function column(token) {
    return [...token.closest(".col").querySelectorAll(".t[data-tip]")];
  }

  document.addEventListener("click", (event) => {
    const token = event.target.closest(".t[data-tip]");
    if (token) pin(token);
  });

  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      pin(null);
      return;
    }
    const token = event.target instanceof Element ? event.target.closest(".t[data-tip]") : null;
    if (!token) return;
    if (event.key === "Enter" || event.key === " ") {
      pin(token);
      event.preventDefault();
    } else if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
      const tokens = column(token);
      const next = tokens[tokens.indexOf(token) + (event.key === "ArrowRight" ? 1 : -1)];
      if (next) {
        next.focus();
        pin(next);
        event.preventDefault();
      }
    }
  });
})();
