"""Programs around the exported model: export it, and translate with it."""
