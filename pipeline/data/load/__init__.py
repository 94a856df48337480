"""Loading a fetched dataset: `loaders.build_loaders` (timm's transforms, or their batched tensor equivalent in
`transforms`), the device-resident path (`device`), a user's images (`images`). No download code is reached from here.
"""
