"""The settings-file reader: typed accessors whose errors name the key path."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from ironflow import errors, settings_file
from ironflow.settings_file import Section

_POD = ("image", "namespace", "resources", "volumes")


def test_docstring_examples_run() -> None:
    assert doctest.testmod(settings_file).failed == 0


def test_unknown_key_suggests_the_nearest_known_one() -> None:
    with pytest.raises(errors.ConfigError, match=r"^unknown key 'namspace'; did you mean 'namespace'\?$"):
        Section({"namspace": "x"}, known=_POD)


def test_unknown_key_without_a_near_one_lists_the_known_keys() -> None:
    with pytest.raises(errors.ConfigError, match=r"^unknown key 'zzz'; known: image, namespace, resources, volumes$"):
        Section({"zzz": 1}, known=_POD)


def test_nested_errors_name_the_full_key_path() -> None:
    top = Section({"resources": {"limits": {"memory": 512}}}, known=_POD)
    limits = top.section("resources", ("limits",)).section("limits", ("cpu", "memory"))
    with pytest.raises(errors.ConfigError, match=r"^resources\.limits\.memory: must be a string, got int$"):
        limits.text("memory")
    typo = Section({"resources": {"limits": {"memry": "1Gi"}}}, known=_POD).section("resources", ("limits",))
    with pytest.raises(errors.ConfigError, match=r"^resources\.limits: unknown key 'memry'; did you mean 'memory'\?$"):
        typo.section("limits", ("cpu", "memory"))


def test_list_items_are_named_by_index() -> None:
    top = Section({"volumes": [{"mount_path": "/a"}, {"mount": "/b"}]}, known=_POD)
    with pytest.raises(errors.ConfigError, match=r"^volumes\[1\]: unknown key 'mount'; did you mean 'mount_path'\?$"):
        top.items("volumes", ("mount_path", "host_path"))
    first = Section({"mount_path": "/a"}, known=("mount_path", "host_path"), path="volumes[0]")
    with pytest.raises(errors.ConfigError, match=r"^volumes\[0\]\.host_path: is required$"):
        first.require("mount_path", "host_path")


@pytest.mark.parametrize(
    ("value", "read", "message"),
    [
        ("5m", Section.number, "must be a number, got str"),
        (True, Section.number, "must be a number, got bool"),
        (1.5, Section.integer, "must be an integer, got float"),
        ("yes", Section.flag, "must be true or false, got str"),
        ({"a": 1}, Section.str_map, "must be a mapping of strings to strings"),
        (["a", 2], Section.str_list, "must be a list of strings, got list"),
    ],
)
def test_accessors_refuse_the_wrong_type(value: object, read: object, message: str) -> None:
    s = Section({"image": value}, known=_POD)
    with pytest.raises(errors.ConfigError, match=f"^image: {message}"):
        read(s, "image")  # type: ignore[operator]


def test_null_counts_as_absent() -> None:
    s = Section({"namespace": None}, known=_POD)
    assert not s.has("namespace")
    assert s.optional_text("namespace") is None


def test_refused_key_says_why() -> None:
    with pytest.raises(errors.ConfigError, match=r"^admin_key: refused: use the environment$"):
        Section({"admin_key": "k"}, known=_POD, refused={"admin_key": "use the environment"})


def test_parse_refuses_bad_yaml_and_non_mappings() -> None:
    with pytest.raises(errors.ConfigError, match=r"^f\.yaml is not valid YAML"):
        settings_file.parse("a: [", source="f.yaml", known=_POD)
    with pytest.raises(errors.ConfigError, match=r"^f\.yaml must hold a mapping of settings$"):
        settings_file.parse("- a", source="f.yaml", known=_POD)


def test_a_yaml_error_is_one_line_naming_where() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        settings_file.parse("a: 1\nb: [\n", source="f.yaml", known=_POD)
    assert "\n" not in caught.value.message
    assert caught.value.message.startswith("f.yaml is not valid YAML: ")
    assert "(line 3, column 1)" in caught.value.message


def test_read_gives_the_mapping_unchecked_for_a_file_of_two_forms(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("pod: {image: i}\nanything: 1\n")
    assert dict(settings_file.read(path, what="provider file")) == {"pod": {"image": "i"}, "anything": 1}


def test_load_names_an_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(errors.ConfigError, match=r"^cannot read provider file '.*nope\.yaml': No such file"):
        settings_file.load(missing, what="provider file", known=_POD)
    good = tmp_path / "p.yaml"
    good.write_text("image: i\n")
    assert settings_file.load(good, what="provider file", known=_POD).text("image") == "i"


def test_reading_a_missing_or_null_key_names_it_as_required_not_a_key_error() -> None:
    section = settings_file.Section({"step": None}, known=("run_id", "step"), path="scope")
    for key in ("run_id", "step"):
        with pytest.raises(errors.ConfigError, match=rf"^scope\.{key}: is required$"):
            section.text(key)
