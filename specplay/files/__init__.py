"""Reading and writing files safely, for every other package: inputs read with a size limit,
JSON bounded and valid, outputs written atomically without harming what is there, and the cache
folder for what specplay downloads or converts."""
