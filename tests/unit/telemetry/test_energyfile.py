"""`telemetry/energyfile`: the energy samples file's lines decode by their type, and a line
out of its words is refused naming the field."""

from __future__ import annotations

import msgspec
import pytest

from anvil_metrics.telemetry.energyfile import EnergyLine, EnergySample, EnergySource

SOURCE = b'{"type": "energy_source", "source": "dcgm", "where": ["http://h:9400/metrics"], ' \
         b'"metric": null, "interval_s": 0.5}'
SAMPLE = b'{"type": "energy_sample", "seq": 0, "t_ns": 5, "mark": "first", "ok": true, ' \
         b'"error": null, "gpus": [{"key": "h:9400/0", "name": "H100", "uuid": null, ' \
         b'"energy_j": 1.5, "power_w": null}]}'


def test_each_line_decodes_by_its_type() -> None:
    dec = msgspec.json.Decoder(EnergyLine)
    src, sample = dec.decode(SOURCE), dec.decode(SAMPLE)
    assert isinstance(src, EnergySource) and src.source == "dcgm"
    assert isinstance(sample, EnergySample) and sample.gpus[0].energy_j == 1.5


@pytest.mark.parametrize(("old", "new", "field"), [
    (b'"source": "dcgm"', b'"source": "rapl"', "source"),
    (b'"interval_s": 0.5', b'"interval_s": 0', "interval_s"),
])
def test_a_bad_field_is_named(old: bytes, new: bytes, field: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=field):
        msgspec.json.decode(SOURCE.replace(old, new), type=EnergyLine)
