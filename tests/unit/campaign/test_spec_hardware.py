"""A variant's gpus and GPU-hour price (campaign/spec.py): its runs' --gpus and
--gpu-hour-price; the campaign's reset_prefix_cache, every run's --reset-prefix-cache; a bad
value is one line naming the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from anvil_metrics.campaign.spec import Campaign, CampaignError, campaign_from_dict

BASE = """
name = "c"
scenario = "s.toml"
runs_per_variant = 1
candidate = "m/on"
incumbent = "m/off"
[[variants]]
model = "m"
served_model = "m"
speculation = "off"
host = "http://127.0.0.1:1"
{first}
[[variants]]
model = "m"
served_model = "m"
speculation = "on"
host = "http://127.0.0.1:2"
[gates]
usd_per_m_output_improvement_percent = 5
"""


def parse_campaign_text(text: str, source: str, base: Path | None = None) -> Campaign:
    return campaign_from_dict(tomllib.loads(text), source, base or Path("."))


def test_a_variants_gpus_and_price_are_kept(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text('measurement_protocol = "p"\n')
    c = parse_campaign_text(BASE.format(first="gpus = 2\ngpu_hour_price = 2.5"), "c.toml",
                            tmp_path)
    assert (c.variants[0].gpus, c.variants[0].gpu_hour_price) == (2, 2.5)
    assert (c.variants[1].gpus, c.variants[1].gpu_hour_price) == (None, None)
    assert c.gates == {"usd_per_m_output_improvement_percent": 5}


@pytest.mark.parametrize(("first", "said"), [
    ("gpus = 0", "variants[1].gpus"), ("gpus = 1.5", "variants[1].gpus"),
    ("gpu_hour_price = 2.0", "a price only beside the variant's gpus"),
    ("gpus = 1\ngpu_hour_price = -1", "variants[1].gpu_hour_price")])
def test_a_bad_value_names_its_key(first: str, said: str) -> None:
    with pytest.raises(CampaignError, match=said.replace("[", r"\[").replace("]", r"\]")):
        parse_campaign_text(BASE.format(first=first), "c.toml")


def test_a_variants_energy_urls_are_its_own_nodes(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text('measurement_protocol = "p"\n')
    c = parse_campaign_text(BASE.format(
        first='energy_urls = ["http://10.0.0.5:9400/metrics", "http://10.0.0.6:9400/metrics"]'),
        "c.toml", tmp_path)
    assert c.variants[0].energy_urls == ("http://10.0.0.5:9400/metrics",
                                         "http://10.0.0.6:9400/metrics")
    assert c.variants[1].energy_urls is None  # the scenario's [energy], if any


@pytest.mark.parametrize("bad", ['"http://h:9400/metrics"', "[]", '["h:9400/metrics"]'])
def test_bad_energy_urls_name_the_key(bad: str) -> None:
    with pytest.raises(CampaignError, match=r"variants\[1\]\.energy_urls.*a list of http"):
        parse_campaign_text(BASE.format(first=f"energy_urls = {bad}"), "c.toml")


@pytest.mark.parametrize("value", ["auto", "auto?", "http://127.0.0.1:1/flush_cache",
                                   "cmd:true"])
def test_the_reset_is_every_runs_flag_as_written(tmp_path: Path, value: str) -> None:
    (tmp_path / "s.toml").write_text('measurement_protocol = "p"\n')
    c = parse_campaign_text(f"reset_prefix_cache = {value!r}\n" + BASE.format(first=""),
                            "c.toml", tmp_path)
    assert c.reset_prefix_cache == value
    assert parse_campaign_text(BASE.format(first=""), "c.toml", tmp_path
                               ).reset_prefix_cache is None


@pytest.mark.parametrize("value", ["'sometimes'", "3", "'cmd:'"])
def test_a_bad_reset_is_one_line_naming_the_key(tmp_path: Path, value: str) -> None:
    (tmp_path / "s.toml").write_text('measurement_protocol = "p"\n')
    with pytest.raises(CampaignError) as e:
        parse_campaign_text(f"reset_prefix_cache = {value}\n" + BASE.format(first=""),
                            "c.toml", tmp_path)
    (line,) = str(e.value).splitlines()
    assert line.startswith("c.toml: reset_prefix_cache: ") and "cmd:COMMAND" in line
