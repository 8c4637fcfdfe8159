"""result.json: the typed record of one run, its writer and its loader."""
