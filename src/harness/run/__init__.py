"""Running one job: build the objects from config, train/infer, write result.json."""
