"""The data layer: dataset registry, fetching (download + verify), and loaders. (Being written: issue 3.)"""
