"""Hardware presets as data (TOML), each number with its source."""
