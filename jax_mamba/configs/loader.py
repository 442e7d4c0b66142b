"""Load a ``RunConfig`` from a bundled name or a YAML path, then apply ``--key=value`` overrides.

A YAML file may start from another with ``base: <name or path>``; sections merge key by key. Override keys are dotted
paths (``--model.ssm_cfg.d_state=64``) or a bare field name when it is unique (``--batch_size=8``); values are
parsed as YAML (``--model.attn_layer_idx=[1,3]``). Unknown keys and wrongly typed values raise ``ConfigError``
naming the field.
"""

import argparse
import dataclasses
import difflib
import types
import typing
from pathlib import Path

import yaml

from jax_mamba.configs.schema import EMBEDDED_DATA_KIND, FAMILIES, MODEL_CONFIGS, RunConfig, validate

CONFIG_DIR = Path(__file__).parent


class ConfigError(ValueError):
    """A config file or override that does not fit the schema."""


def available_configs() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def _resolve_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    candidates = [Path(name_or_path)]
    if relative_to is not None:
        candidates.insert(0, relative_to / name_or_path)
    candidates.append(CONFIG_DIR / f"{name_or_path}.yaml")
    for path in candidates:
        if path.is_file():
            return path
    raise ConfigError(f"config {name_or_path!r} not found: not a YAML file, and not one of {available_configs()}")


def parse_args_with_overrides(parser: argparse.ArgumentParser, argv: list[str] | None = None):
    """``parser.parse_known_args`` where every unknown argument must be a ``--key=value`` config override.

    Returns (args, overrides); anything else is a usage error naming it."""
    args, overrides = parser.parse_known_args(argv)
    bad = [item for item in overrides if not (item.startswith("--") and "=" in item)]
    if bad:
        parser.error(f"unrecognized arguments {bad}: config overrides look like --key=value")
    return args, overrides


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    if path.resolve() in seen:
        raise ConfigError(f"config {path} includes itself through 'base'")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping of sections, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    return _merge(_read_yaml(_resolve_path(base, path.parent), (*seen, path.resolve())), data)


def _field_types(cls, data: dict) -> dict:
    """Field name -> type; a ``RunConfig``'s model section is the class of its ``family`` (``lm`` by default)."""
    hints = typing.get_type_hints(cls)
    if cls is RunConfig:
        family = data.get("family", "lm")
        if family not in FAMILIES:
            raise ConfigError(f"config field family: expected one of {FAMILIES}, got {family!r}")
        hints["model"] = MODEL_CONFIGS[family]
    return hints


def _leaf_paths(cls, prefix: str = "", data: dict | None = None) -> list[str]:
    paths = []
    hints = _field_types(cls, data or {})
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            paths += _leaf_paths(hint, f"{prefix}{f.name}.")
        else:
            paths.append(f"{prefix}{f.name}")
    return paths


def _apply_override(data: dict, item: str | tuple[str, object]) -> None:
    """``--key=value`` (value parsed as YAML) or an already-typed ``(key, value)`` pair."""
    if isinstance(item, tuple):
        key, value = item
    else:
        key, sep, raw = item.removeprefix("--").partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like --key=value")
        value = yaml.safe_load(raw) if raw != "" else None
    if "." not in key:
        matches = [p for p in _leaf_paths(RunConfig, data=data) if p.split(".")[-1] == key]
        if len(matches) > 1:
            raise ConfigError(f"override key {key!r} is ambiguous: use one of {matches}")
        if matches:
            key = matches[0]
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override key {key!r}: {part!r} is not a section")
    node[parts[-1]] = value


def _coerce(value, hint, path: str):
    """Convert a YAML value to the annotated type, or raise ConfigError naming ``path``."""
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, path)
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, path)
            except ConfigError:
                continue
        raise ConfigError(f"config field {path}: expected {hint}, got {value!r}")
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise ConfigError(f"config field {path}: expected a list of {len(args)} values, got {value!r}")
        return tuple(_coerce(v, t, f"{path}[{i}]") for i, (v, t) in enumerate(zip(value, args, strict=True)))
    if origin is list:
        (arg,) = typing.get_args(hint)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"config field {path}: expected a list, got {value!r}")
        return [_coerce(v, arg, f"{path}[{i}]") for i, v in enumerate(value)]
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads 1e-4 and inf as strings
        try:
            return float(value)
        except ValueError:
            pass
    if hint in (int, str, bool) and type(value) is hint:
        return value
    raise ConfigError(f"config field {path}: expected {getattr(hint, '__name__', hint)}, got {value!r}")


def _build(cls, data, path: str):
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config section {path or 'top level'}: expected a mapping, got {data!r}")
    hints = _field_types(cls, data)
    if cls is RunConfig:  # the model section's class and the default data kind depend on the family
        data = {**data, "model": {} if data.get("model") is None else data["model"]}
        section = data.get("data")
        if section is None or isinstance(section, dict):
            data["data"] = {"kind": EMBEDDED_DATA_KIND.get(data.get("family", "lm")), **(section or {})}
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        key = unknown[0]
        near = difflib.get_close_matches(str(key), names, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else f"; known: {names}"
        raise ConfigError(f"unknown config key {path + '.' if path else ''}{key}{hint}")
    kwargs = {k: _coerce(v, hints[k], f"{path + '.' if path else ''}{k}") for k, v in data.items()}
    return cls(**kwargs)


def load_config(name_or_path: str, overrides=()) -> RunConfig:
    """Bundled config name (see ``available_configs()``) or YAML path, plus overrides (``--key=value`` strings or
    ``(key, value)`` pairs), validated."""
    path = _resolve_path(name_or_path)
    data = _read_yaml(path)
    data.setdefault("name", path.stem)
    for item in overrides:
        _apply_override(data, item)
    cfg = _build(RunConfig, data, "")
    try:
        return validate(cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def config_to_dict(cfg: RunConfig) -> dict:
    """Plain, YAML-safe dict (tuples become lists, inf stays a float)."""
    return yaml.safe_load(yaml.safe_dump(_plain(dataclasses.asdict(cfg))))


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def config_from_dict(data: dict) -> RunConfig:
    """Inverse of :func:`config_to_dict` (used to restore a run's saved config)."""
    try:
        return validate(_build(RunConfig, data, ""))
    except ValueError as err:
        raise ConfigError(str(err)) from None
