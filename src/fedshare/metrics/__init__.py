"""Measurements of trained models beside accuracy (the separability of their features)."""
