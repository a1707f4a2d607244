"""Pipeline settings from a YAML file: ``PipelineConfig(config_file=..., section_name=...)`` and
``max ... --config-file``, with arguments given in code or on the command line winning over the
file, and clear errors for bad files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from max.driver import DeviceSpec
from max.pipelines import PipelineConfig
from models import smollm2_gguf


def _write(tmp_path, text: str, name: str = "config.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_settings_come_from_the_file_and_arguments_win(tmp_path):
    path = _write(tmp_path, """
model-path: m.gguf
max_length: 4096
max-batch-size: 3
devices: cpu
kv_cache:
  kv_cache_page_size: 64
  enable_prefix_caching: true
""")
    config = PipelineConfig(config_file=path)
    assert config.config_file == str(path)
    assert (config.max_length, config.max_batch_size) == (4096, 3)
    assert config.model.model_path == "m.gguf"
    assert config.model.device_specs == [DeviceSpec.cpu()]
    assert (config.model.kv_cache.kv_cache_page_size, config.model.kv_cache.enable_prefix_caching) == (64, True)
    mine = PipelineConfig(config_file=str(path), max_length=128, kv_cache_page_size=16, model_path="other.gguf")
    assert (mine.max_length, mine.max_batch_size) == (128, 3)
    assert (mine.model.kv_cache.kv_cache_page_size, mine.model.model_path) == (16, "other.gguf")


def test_a_section_of_a_larger_file(tmp_path):
    path = _write(tmp_path, "small:\n  max_length: 256\n  model: a.gguf\nlarge:\n  max_length: 8192\nname: x\n")
    assert PipelineConfig(config_file=path, section_name="large").max_length == 8192
    small = PipelineConfig(config_file=path, section_name="small")
    assert (small.max_length, small.model.model_path) == (256, "a.gguf")
    with pytest.raises(KeyError, match=r"section 'medium' not in config file .*\['small', 'large'\]"):
        PipelineConfig(config_file=path, section_name="medium")
    with pytest.raises(ValueError, match="section 'name'.*expected a mapping of settings, got str"):
        PipelineConfig(config_file=path, section_name="name")
    with pytest.raises(ValueError, match="section_name needs a config_file"):
        PipelineConfig(section_name="small")


@pytest.mark.parametrize("text,error,needle", [
    ("- 1\n- 2\n", ValueError, "expected a mapping of settings, got list"),
    ("max_length: [1\n", ValueError, "is not valid YAML"),
    ("max_lenght: 5\n", TypeError, "unknown arguments: max_lenght"),
    ("max_length: 5\nmax-length: 6\n", ValueError, "'max_length' is given twice"),
    ("1: 5\n", ValueError, "setting names must be strings"),
    ("devices: gpu:x\n", ValueError, "devices: bad device list 'gpu:x'"),
    ("devices: 3\n", ValueError, "devices must be a string"),
    ("max_length: 0\n", ValueError, "max_length must be positive"),
])
def test_bad_files_are_named(tmp_path, text, error, needle):
    with pytest.raises(error, match=needle.replace("(", r"\(").replace("[", r"\[")):
        PipelineConfig(config_file=_write(tmp_path, text))


def test_an_empty_file_and_a_missing_one(tmp_path):
    assert PipelineConfig(config_file=_write(tmp_path, "")).max_length is None
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        PipelineConfig(config_file=tmp_path / "nope.yaml")


def _cli_config(argv: list[str], *extra: str):
    from max.entrypoints.cli import _parser
    from max.entrypoints.cli.options import given_dests, pipeline_config

    parser = _parser()
    args = parser.parse_args(argv)
    args._given = given_dests(parser, argv)
    return args, pipeline_config(args, **{k: getattr(args, k) for k in extra})


def test_flags_given_win_over_the_file_and_the_file_over_flag_defaults(tmp_path):
    path = _write(tmp_path, "model_path: m.gguf\nmax_batch_input_tokens: 1024\nkv_cache_page_size: 32\n"
                            "enable_prefix_caching: false\nmax_num_steps: 4\n")
    _, config = _cli_config(["serve", "--config-file", str(path)], "served_model_name")
    assert config.model.model_path == "m.gguf"
    assert (config.max_batch_input_tokens, config.model.kv_cache.kv_cache_page_size) == (1024, 32)
    assert config.model.kv_cache.enable_prefix_caching is False  # serve's default is on; the file says off
    assert config.max_num_steps == 4  # a setting without a flag
    assert config.model.served_model_name is None
    _, config = _cli_config(["serve", "--config-file", str(path), "--kv-cache-page-size", "128",
                             "--enable-prefix-caching", "--model-path", "n.gguf", "--served-model-name", "x"],
                            "served_model_name")
    assert config.model.kv_cache.kv_cache_page_size == 128  # given, although it equals the default
    assert config.model.kv_cache.enable_prefix_caching is True
    assert (config.model.model_path, config.model.served_model_name, config.max_batch_input_tokens) == (
        "n.gguf", "x", 1024)


def _max(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "max", *args], capture_output=True, text=True, timeout=300)


def test_generate_with_a_config_file(tmp_path):
    path = _write(tmp_path, f"model_path: {smollm2_gguf()}\ndevices: cpu\nmax_length: 64\n")
    r = _max("generate", "--config-file", str(path), "--prompt", "The capital of France is", "--max-new-tokens", "4",
             "--top-k", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The capital of France is Paris")
    r = _max("generate", "--config-file", str(path), "--prompt", "word " * 100)
    assert r.returncode == 2 and "64" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_cli_errors_without_a_model_or_with_a_bad_file(tmp_path):
    r = _max("generate", "--prompt", "hi")
    assert r.returncode == 2 and "give --model-path" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = _max("generate", "--config-file", str(_write(tmp_path, "max_length: 8\n")), "--prompt", "hi")
    assert r.returncode == 2 and "model_path in --config-file" in r.stderr, r.stderr
    r = _max("generate", "--config-file", str(tmp_path / "missing.yaml"), "--prompt", "hi")
    assert r.returncode == 2 and "missing.yaml" in r.stderr and "FileNotFoundError" in r.stderr, r.stderr


# MAX's flags for the pipeline settings (its generate/serve/encode pages), besides those the
# commands have their own help for.
MAX_SETTING_FLAGS = [
    "--allow-safetensors-weights-fp32-bf6-bidirectional-cast", "--cache-strategy", "--ce-delay-ms", "--defer-resolve",
    "--device-graph-capture", "--enable-echo", "--enable-in-flight-batching", "--enable-kvcache-swapping-to-host",
    "--enable-min-tokens", "--enable-penalties", "--enable-prioritize-first-decode", "--enable-structured-output",
    "--enable-variable-logits", "--ep-size", "--execute-empty-batches", "--force", "--force-download",
    "--gpu-profiling", "--host-kvcache-swap-space-gb", "--huggingface-model-revision",
    "--huggingface-weight-revision", "--kvcache-ce-watermark", "--max-batch-total-tokens", "--max-num-steps",
    "--max-queue-size-tg", "--min-batch-size-tg", "--pipeline-role", "--pool-embeddings", "--rope-type",
    "--section-name", "--served-model-name", "--use-experimental-kernels", "--use-legacy-module", "--use-subgraphs",
    "--use-vendor-blas", "--vision-config-overrides", "--zmq-endpoint-base", "--config-file",
]


@pytest.mark.parametrize("command", ["generate", "encode", "serve", "warm-cache"])
def test_every_setting_has_its_flag(command):
    from max.entrypoints.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    flags = {s for a in sub._actions for s in a.option_strings}
    assert [f for f in MAX_SETTING_FLAGS if f not in flags] == []


def test_setting_flags_reach_the_config_and_are_checked(tmp_path):
    from max.nn.kv_cache import KVCacheStrategy

    _, config = _cli_config(["generate", "--model-path", "m.gguf", "--max-num-steps", "4", "--enable-echo",
                             "--no-enable-penalties", "--cache-strategy", "PAGED", "--ce-delay-ms", "1.5",
                             "--vision-config-overrides", '{"a": 1}', "--use-vendor-blas", "true"])
    assert (config.max_num_steps, config.enable_echo, config.ce_delay_ms, config.use_vendor_blas) == (4, True, 1.5,
                                                                                                       "true")
    assert config.sampling.enable_penalties is False
    assert config.model.kv_cache.cache_strategy is KVCacheStrategy.PAGED
    assert config.model.vision_config_overrides == {"a": 1}
    for flags, needle in [(["--pipeline-role", "prefill_only"], "disaggregated prefill"),
                          (["--ep-size", "2"], "expert parallelism"),
                          (["--force-download"], "nothing is downloaded"),
                          (["--rope-type", "neox"], "cannot be overridden"),
                          (["--enable-kvcache-swapping-to-host"], "swapping KV-cache pages")]:
        with pytest.raises(NotImplementedError, match=needle):
            _cli_config(["serve", "--model-path", "m.gguf", *flags])
    path = _write(tmp_path, "a:\n  max_num_steps: 2\n  model_path: m.gguf\n")
    _, config = _cli_config(["generate", "--config-file", str(path), "--section-name", "a"])
    assert (config.max_num_steps, config.section_name) == (2, "a")


@pytest.mark.parametrize("flags,needle", [
    (["--cache-strategy", "bogus"], "'bogus' is not one of model_default, paged"),
    (["--vision-config-overrides", "[1]"], "expected a JSON object"),
    (["--max-num-steps", "x"], "invalid int value"),
])
def test_bad_setting_flags(flags, needle):
    r = _max("generate", "--model-path", "m.gguf", "--prompt", "hi", *flags)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
