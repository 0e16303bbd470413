"""The Settings page lists every setting as `Settings` defines it: the committed page equals the generated one, and
the generator fails on a page without its block or a field under no section. Pure logic, no server."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from agent.config.settings import Settings
from agent.config.settings_doc import (
    BEGIN,
    END,
    PAGE,
    SettingsDocError,
    bounds_text,
    default_text,
    main,
    render,
    render_page,
    sections,
    type_text,
)


def test_the_committed_page_is_the_generated_one() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert render_page(text) == text, "run `python -m agent.config.settings_doc` and commit docs/settings.md"


def test_every_setting_is_in_one_section_and_on_the_page() -> None:
    named = [name for _, names in sections() for name in names]
    assert sorted(named) == sorted(Settings.model_fields)
    page = PAGE.read_text(encoding="utf-8")
    for name in Settings.model_fields:
        assert page.count(f"| `{name.upper()}` |") == 1, name


def test_types_bounds_and_defaults_read_as_the_environment_spells_them() -> None:
    fields = Settings.model_fields
    assert type_text(int | None) == "integer"
    assert type_text(tuple[Literal["a", "b"], ...]) == "list of `a`, `b`"
    assert bounds_text(fields["vllm_nice"]) == "0–19"
    assert bounds_text(fields["triton_timeout_s"]) == "> 0"
    assert bounds_text(fields["llm_model"]) == ""
    assert default_text("max_body_bytes", fields["max_body_bytes"]) == "1048576 (1 MiB)"
    assert default_text("services", fields["services"]) == "`postgres,triton,vllm`"
    assert default_text("database_url", fields["database_url"]) == "unset"
    assert default_text("triton_grpc_channel_args", fields["triton_grpc_channel_args"]) == "`{}`"
    assert default_text("answer_timeout_s", fields["answer_timeout_s"]) == "180"
    assert "| `VLLM_NICE` | integer, 0–19 | 5 | Niceness of the local vLLM" in render()


def test_a_stale_page_is_reported_and_rewritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "settings.md"
    page.write_text(PAGE.read_text(encoding="utf-8").replace("| `TOP_K` |", "| `TOP_N` |"), encoding="utf-8")
    assert main(["--check", "--page", str(page)]) == 1
    assert "stale" in capsys.readouterr().err
    assert main(["--page", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")
    assert main(["--check", "--page", str(page)]) == 0


def test_a_page_without_its_block_or_a_field_under_no_section_fails() -> None:
    with pytest.raises(SettingsDocError, match="one block"):
        render_page("# Settings\n")
    with pytest.raises(SettingsDocError, match="one block"):
        render_page(f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n")

    class Unsectioned(Settings):
        stray_s: float = Field(default=1.0, description="A field above every section comment, seconds.")

    with pytest.raises(SettingsDocError, match="STRAY_S is under no"):
        list(sections(Unsectioned))
