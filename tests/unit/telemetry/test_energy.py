"""The energy readers (`telemetry/energy.py`) on the texts real exporters and NVML give, and
on bad and partial data: a missing counter, a reset, a GPU gone, garbage, a hang."""

from __future__ import annotations

import io
import socket
import sys
import time
import types
from pathlib import Path
from typing import Any

import msgspec
import pytest

from anvil_metrics.load.energyplan import EnergyPlan, parse_selector
from anvil_metrics.telemetry import energy
from anvil_metrics.telemetry.energyfile import EnergyLine, EnergySample, EnergySource, GpuReading
from anvil_metrics.telemetry.scrape import exposition_samples

TEXTS = Path(__file__).resolve().parents[2] / "fixtures" / "energy"
# dcgm-exporter 3.x with its default counters (default-counters.csv's HELP words), two GPUs
# of a node, as it labels them (gpu, UUID, device, modelName, Hostname, the driver's version)
DCGM = (TEXTS / "dcgm-exporter.prom").read_text()
# an older exporter (2.x, as its README shows it): a space after each comma, no modelName,
# and DCGM's blank "not supported" (9223372036854775794) for a field the GPU lacks
DCGM_OLD = (TEXTS / "dcgm-exporter-2.prom").read_text()
# AMD's device-metrics-exporter (its mandatory labels: hostname, serial number, ...)
AMD = (TEXTS / "amd-device-metrics-exporter.prom").read_text()
# Triton's /metrics: energy in joules since the server started, by the GPU's UUID
TRITON = (TEXTS / "triton.prom").read_text()
NODE = "10.0.0.5:9400"


def test_a_dcgm_exporters_reply_gives_each_gpus_joules_watts_name_and_uuid() -> None:
    gpus = energy.dcgm_gpus(exposition_samples(DCGM), NODE)
    assert gpus == [
        GpuReading(key="10.0.0.5:9400/0", name="NVIDIA H100 80GB HBM3",
                   uuid="GPU-34319582-d595-d1c7-d1d2-179bcfa61660", energy_j=319159.391,
                   power_w=409.692),
        GpuReading(key="10.0.0.5:9400/1", name="NVIDIA H100 80GB HBM3",
                   uuid="GPU-8c16e996-bd76-aa91-17e7-b48bcd0208ba", energy_j=31035686.671,
                   power_w=23.528)]


def test_without_the_energy_counter_the_power_is_read_and_the_energy_is_null() -> None:
    """Its energy is DCGM's blank (not supported), never 9.2e15 J; or not there at all."""
    (gpu,) = energy.dcgm_gpus(exposition_samples(DCGM_OLD), NODE)
    assert (gpu.energy_j, gpu.power_w, gpu.name) == (None, 23.528, None)
    no_counter = "\n".join(x for x in DCGM_OLD.splitlines() if "ENERGY" not in x) + "\n"
    (gpu,) = energy.dcgm_gpus(exposition_samples(no_counter), NODE)
    assert (gpu.energy_j, gpu.power_w, gpu.name) == (None, 23.528, None)
    assert gpu.uuid == "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"


def test_a_reply_with_neither_or_only_mig_series_is_refused() -> None:
    with pytest.raises(ValueError, match="no DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION nor"):
        energy.dcgm_gpus(exposition_samples(AMD), NODE)
    mig = ('DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-1",device="nvidia0",GPU_I_PROFILE='
           '"1g.10gb",GPU_I_ID="7"} 80\n')
    with pytest.raises(ValueError):
        energy.dcgm_gpus(exposition_samples(mig), NODE)


def test_any_metric_by_name_labels_and_unit() -> None:
    amd = parse_selector('gpu_power_usage{hostname="mi300-1"}:W')
    gpus = energy.metric_gpus(exposition_samples(AMD), "mi300-1:5000", amd)
    assert [(g.key, g.power_w, g.energy_j) for g in gpus] == [
        ("mi300-1:5000/card_model=0x74a1,card_series=AMD Instinct MI300X OAM,gpu_id=0,"
         "serial_number=692251001124", 152.0, None),
        ("mi300-1:5000/card_model=0x74a1,card_series=AMD Instinct MI300X OAM,gpu_id=1,"
         "serial_number=692251001125", 748.0, None)]
    assert gpus[0].name == "0x74a1"
    (t,) = energy.metric_gpus(exposition_samples(TRITON), "triton:8002",
                              parse_selector("nv_energy_consumption:J"))
    assert (t.energy_j, t.power_w, t.uuid) == (1218.514, None,
                                               "GPU-0e9fdafb-5adb-91cd-26a8-308d34357efc")
    (mw,) = energy.metric_gpus(exposition_samples(TRITON), "t:1",
                               parse_selector("nv_gpu_power_usage:mW"))
    assert mw.power_w == pytest.approx(0.055137)
    with pytest.raises(ValueError, match="no series gpu_power_usage:W"):
        energy.metric_gpus(exposition_samples(TRITON), "t:1", parse_selector("gpu_power_usage:W"))


class Fetches:
    """`scrape_samples` answering each URL's texts in turn (an exception is raised)."""

    def __init__(self, texts: dict[str, list[Any]]) -> None:
        self.texts = texts

    def __call__(self, url: str, timeout_s: float) -> Any:
        got = self.texts[url].pop(0)
        if isinstance(got, Exception):
            raise got
        return exposition_samples(got)


def _lines(buf: io.BytesIO) -> list[EnergySample]:
    dec = msgspec.json.Decoder(EnergyLine)
    return [dec.decode(x) for x in buf.getvalue().splitlines()]


def test_reset_gone_gpu_garbage_and_a_failed_node_as_the_file_says_them() -> None:
    """The counter is written as read (a reset is a decrease the energy block sees), a GPU
    gone is missing from later samples, a node that fails fails the reading."""
    a, b = "http://10.0.0.5:9400/metrics", "http://10.0.0.6:9400/metrics"
    reset = DCGM.replace("319159391", "1200")
    gone = "\n".join(x for x in DCGM.splitlines() if 'gpu="1"' not in x) + "\n"
    fetch = Fetches({a: [DCGM, reset, gone, DCGM], b: [DCGM, DCGM, DCGM,
                                                       OSError("no answer within 2 s")]})
    read = energy.url_reader(EnergyPlan("dcgm", (a, b)), 2.0, fetch)
    out = io.BytesIO()
    sampler = energy.EnergySampler(read, out, 0.5)
    assert [sampler.sample(m) for m in ("first", None, None, "last")] == [0, 1, 2, 3]
    s = _lines(out)
    assert [len(x.gpus) for x in s] == [4, 4, 3, 0]
    assert [g.key for g in s[0].gpus] == ["10.0.0.5:9400/0", "10.0.0.5:9400/1",
                                          "10.0.0.6:9400/0", "10.0.0.6:9400/1"]
    assert s[1].gpus[0].energy_j == 1.2 < s[0].gpus[0].energy_j  # the reset, as read
    assert "10.0.0.5:9400/1" not in {g.key for g in s[2].gpus}
    assert (s[3].ok, s[3].mark, s[3].error) == (False, "last", f"{b}: no answer within 2 s")
    assert all(x.ok and x.error is None for x in s[:3])
    assert [x.seq for x in s] == [0, 1, 2, 3] and s[0].t_ns < s[3].t_ns


@pytest.mark.parametrize("text", ["<html><body>502 Bad Gateway</body></html>",
                                  "DCGM_FI_DEV_POWER_USAGE{gpu=0 12\n", ""])
def test_garbage_is_a_failed_reading_of_one_line(text: str) -> None:
    def fetch(url: str, timeout_s: float) -> Any:
        from anvil_metrics.telemetry.scrape import parse_reply
        return parse_reply(text, exposition_samples)

    out = io.BytesIO()
    energy.EnergySampler(energy.url_reader(EnergyPlan("dcgm", ("http://x:1/m",)), 1, fetch),
                         out, 0.5).sample(None)
    (s,) = _lines(out)
    assert not s.ok and s.gpus == [] and "\n" not in s.error
    assert s.error.startswith("http://x:1/m: ")
    assert "not Prometheus text" in s.error or "holds no metrics" in s.error


def test_an_exporter_that_never_answers_is_a_reading_that_timed_out() -> None:
    """A listening socket nobody answers on: the reading gives up after its timeout."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        url = f"http://127.0.0.1:{srv.getsockname()[1]}/metrics"
        read = energy.url_reader(EnergyPlan("dcgm", (url,)), 0.3)
        t0 = time.monotonic()
        with pytest.raises(OSError, match=f"{url}: no answer within 0.3 s"):
            read()
        assert time.monotonic() - t0 < 3.0


class FakeNvml(types.ModuleType):
    """pynvml as NVIDIA documents it: handles by index; names and UUIDs as str
    (nvidia-ml-py >= 11.515); energy in mJ since the driver loaded, power in mW; NVMLError
    subclasses for a call a device does not support and a GPU that is lost."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    def __init__(self, energy_mj: list[int | None], power_mw: list[int]) -> None:
        super().__init__("pynvml")
        self.energy_mj, self.power_mw = energy_mj, power_mw
        self.lost: set[int] = set()
        self.inits = 0

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's own names
        self.inits += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.power_mw)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        if i in self.lost:
            raise self.NVMLError_GpuIsLost("GPU is lost")
        return i

    def nvmlDeviceGetName(self, h: int) -> str:  # noqa: N802
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: int) -> bytes:  # noqa: N802 - older bindings: bytes
        return f"GPU-00000000-0000-0000-0000-00000000000{h}".encode()

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:  # noqa: N802
        v = self.energy_mj[h]
        if v is None:
            raise self.NVMLError_NotSupported("Not Supported")
        return v

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        return self.power_mw[h]


def test_nvml_readings_in_joules_and_watts_a_lost_gpu_left_out() -> None:
    nvml = FakeNvml([123456789, None], [312500, 70250])
    read = energy.nvml_reader(nvml)
    assert read() == [
        GpuReading(key="nvml/0", name="NVIDIA H100 80GB HBM3",
                   uuid="GPU-00000000-0000-0000-0000-000000000000", energy_j=123456.789,
                   power_w=312.5),
        GpuReading(key="nvml/1", name="NVIDIA H100 80GB HBM3",
                   uuid="GPU-00000000-0000-0000-0000-000000000001", energy_j=None,
                   power_w=70.25)]
    nvml.lost.add(1)
    assert [g.key for g in read()] == ["nvml/0"]
    nvml.lost.add(0)
    with pytest.raises(OSError, match="NVML shows no GPU"):
        read()


def test_why_nvml_cannot_be_read_is_one_line_naming_the_flag_and_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: ImportError
    missing = energy.nvml_problem()
    assert missing is not None and missing.startswith("--energy nvml: nvidia-ml-py is not")
    assert "anvil-metrics[nvml]" in missing
    nvml = FakeNvml([1], [1])
    assert energy.nvml_problem(nvml) is None and nvml.inits == 1

    def no_driver() -> None:
        raise nvml.NVMLError("Driver Not Loaded")

    nvml.nvmlInit = no_driver  # type: ignore[method-assign]
    said = energy.nvml_problem(nvml)
    assert said is not None and "Driver Not Loaded" in said and "--energy-url" in said
    assert "no GPU" in (energy.nvml_problem(FakeNvml([], [])) or "")


def test_the_childs_command_line_and_head_line(tmp_path: Any) -> None:
    plan = EnergyPlan("metric", ("http://u:pw@10.0.0.5:5000/metrics",),
                      parse_selector('gpu_power_usage{gpu_id="0"}:W'), 0.25)
    argv = energy.child_args(plan, "out.jsonl", 2.0)
    assert "u:pw" not in " ".join(argv)
    assert argv[argv.index("--url") + 1] == "http://10.0.0.5:5000/metrics"
    assert argv[argv.index("--metric") + 1] == 'gpu_power_usage{gpu_id="0"}:W'
    # the child itself: its head line, then it ends at the end of its stdin
    out = tmp_path / "energy.jsonl"
    import subprocess

    proc = subprocess.run([*energy.child_args(plan, str(out), 0.2), "--max-s", "5"],
                          input=b"", capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    head = msgspec.json.decode(out.read_bytes().splitlines()[0], type=EnergyLine)
    assert head == EnergySource(source="metric", where=["http://10.0.0.5:5000/metrics"],
                                metric='gpu_power_usage{gpu_id="0"}:W', interval_s=0.25)


def test_the_nodes_are_read_at_once() -> None:
    """Each node's fetch waits at a barrier for the other's: read one after the other, the
    barrier would break."""
    import threading

    both = threading.Barrier(2, timeout=10)

    def fetch(url: str, timeout_s: float) -> Any:
        both.wait()
        return exposition_samples(DCGM)

    urls = ("http://10.0.0.5:9400/metrics", "http://10.0.0.6:9400/metrics")
    gpus = energy.url_reader(EnergyPlan("dcgm", urls), 1.0, fetch)()
    assert [g.key for g in gpus] == ["10.0.0.5:9400/0", "10.0.0.5:9400/1", "10.0.0.6:9400/0",
                                     "10.0.0.6:9400/1"]
