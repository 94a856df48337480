"""Loading a fetched dataset: `loaders.build_loaders`, the device-resident path (`device`), a user's images
(`images`). No download code is reached from here."""
