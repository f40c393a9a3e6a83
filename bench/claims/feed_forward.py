"""The position-wise feed-forward network: its size, FLOPs and position-wise action, as the study notes state them."""

from __future__ import annotations
