"""Building blocks shared by several strategies, one module per topic (losses, calibration,
prototypes, ...). Import the module you need, e.g. `from fedshare.functional import calibration`.
"""
