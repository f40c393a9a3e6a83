"""Complexity: the FLOPs of the layers and of their parts, sequential steps and path lengths, as the study notes state them."""

from __future__ import annotations
