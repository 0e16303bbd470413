"""The alert rules as the Prometheus Helm chart installs them from `infra/production/prometheus-values.yaml`.

The chart (prometheus-community/helm-charts, `charts/prometheus/templates/cm.yaml`) writes every `serverFiles` entry
other than `prometheus.yml` and `alerts` as `{{ toYaml $value }}` into `/etc/config/<key>`, and its default
`prometheus.yml` loads `/etc/config/alerting_rules.yml`. So the value under `serverFiles."alerting_rules.yml"` must
be the rule file's own mapping (`groups:`): passed as a string (`--set-file`), toYaml writes a YAML string and
Prometheus cannot load the file. These tests render that file the way the chart does and run `promtool check rules`
and `promtool test rules` (the unit tests of alerts_test.yml) on exactly that text.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO_ROOT
from tests.external_tools import promtool

PROD_DIR = REPO_ROOT / "infra" / "production"
RULES_KEY = "alerting_rules.yml"


def chart_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((PROD_DIR / "prometheus-values.yaml").read_text(encoding="utf-8"))
    return values


def chart_written(value: Any) -> str:
    """What the chart writes for a `serverFiles` entry: Helm's `toYaml` (sigs.k8s.io/yaml: keys sorted, block style),
    or "{}" for an empty value."""
    return yaml.safe_dump(value, sort_keys=True, default_flow_style=False) if value else "{}\n"


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_values_carry_the_rules_as_a_mapping_equal_to_alerts_yml() -> None:
    rules = chart_values()["serverFiles"][RULES_KEY]
    assert isinstance(rules, dict) and isinstance(rules.get("groups"), list), (
        f'serverFiles."{RULES_KEY}" must be the rule file\'s mapping with `groups`, not a string (--set-file)'
    )
    alerts = yaml.safe_load((PROD_DIR / "alerts.yml").read_text(encoding="utf-8"))
    assert rules == alerts, "prometheus-values.yaml's rules differ from alerts.yml"
    # The chart's own prometheus.yml (whose rule_files load /etc/config/alerting_rules.yml) is left as it is.
    assert "prometheus.yml" not in chart_values()["serverFiles"]
    readme = (PROD_DIR / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("helm install prometheus prometheus-community/prometheus") :].split("\nhelm ")[0]
    assert "-f infra/production/prometheus-values.yaml" in install and "--set-file" not in install, install


def test_promtool_loads_and_unit_tests_the_rule_file_the_chart_writes(tmp_path: Path) -> None:
    written = chart_written(chart_values()["serverFiles"][RULES_KEY])
    (tmp_path / RULES_KEY).write_text(written, encoding="utf-8")
    unit_tests = yaml.safe_load((PROD_DIR / "alerts_test.yml").read_text(encoding="utf-8"))
    unit_tests["rule_files"] = [RULES_KEY]
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(unit_tests, sort_keys=False), encoding="utf-8")
    checked = run_promtool("check", "rules", RULES_KEY, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    count = sum(len(group["rules"]) for group in yaml.safe_load(written)["groups"])
    assert f"SUCCESS: {count} rules found" in checked.stdout, checked.stdout
    tested = run_promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_rules_passed_as_a_string_make_a_file_prometheus_cannot_load(tmp_path: Path) -> None:
    """The old install (`--set-file 'serverFiles.alerting_rules\\.yml=alerts.yml'`): the chart writes the string."""
    as_string = (PROD_DIR / "alerts.yml").read_text(encoding="utf-8")
    (tmp_path / RULES_KEY).write_text(chart_written(as_string), encoding="utf-8")
    checked = run_promtool("check", "rules", RULES_KEY, cwd=tmp_path)
    assert checked.returncode != 0, "promtool accepted the rules written as a YAML string"
