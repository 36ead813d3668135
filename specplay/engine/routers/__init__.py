"""The routers, which decide which drafter proposes: per request (request.py: the code/prose
heuristic, route maps, the choice `--route auto` makes and why), a classifier trained on
sessions (learned.py; `specplay router` trains and evaluates it, in specplay/routing), and per
round (rounds.py: `--route adaptive`, from what the run measures)."""
