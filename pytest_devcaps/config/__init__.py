"""YAML in, validated objects out: the catalogue, vendor rules, overrides and device profiles.

This layer never imports torch.
"""

from __future__ import annotations

from pytest_devcaps.config.catalogue import (
    ANY_VENDOR,
    Catalogue,
    CapabilitySpec,
    RuleVerdict,
    VendorRule,
    classify,
    load_catalogue,
    parse_level,
    render_reason,
    shipped_catalogue_path,
)
from pytest_devcaps.config.expressions import Expression, compile_expression
from pytest_devcaps.config.overrides import OverrideEntry, load_overrides
from pytest_devcaps.config.profiles import DeviceProfile, list_profiles, load_profile

__all__ = [
    "ANY_VENDOR",
    "Catalogue",
    "CapabilitySpec",
    "DeviceProfile",
    "Expression",
    "OverrideEntry",
    "RuleVerdict",
    "VendorRule",
    "classify",
    "compile_expression",
    "list_profiles",
    "load_catalogue",
    "load_overrides",
    "load_profile",
    "parse_level",
    "render_reason",
    "shipped_catalogue_path",
]
