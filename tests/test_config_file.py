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
    ("max_length: 5\nmax_length: 6\n", ValueError, "'max_length' is given twice"),
    ("small:\n  max_length: 5\nsmall:\n  max_batch_size: 3\n", ValueError, "'small' is given twice"),
    ("max_length: .inf\n", ValueError, "max_length must be an integer, got inf"),
    ("max_length: 1.5\n", ValueError, "max_length must be an integer, got 1.5"),
    ("max_length: sixty\n", ValueError, "max_length must be an integer, got 'sixty'"),
    ("enable_prefix_caching: maybe\n", ValueError, "enable_prefix_caching must be true or false"),
    ("custom_architectures: mymodule\n", ValueError, "custom_architectures must be a list of text"),
    ("cache_strategy: bogus\n", ValueError, "cache_strategy must be one of model_default, paged"),
    ("sampling: 5\n", ValueError, "sampling must be a mapping of its settings, got 5"),
    ("model: 5\n", ValueError, "model must be the model's path or a mapping of its settings"),
    ("device_specs: cpu\n", ValueError, "give the devices as devices: cpu, gpu or gpu:0,1"),
    ("chat_template: 5\n", ValueError, "chat_template must be text or null"),
    ("gpu_profiling: loud\n", ValueError, "gpu_profiling must be off, on or detailed"),
    ("huggingface_model_revision: v2\n", NotImplementedError, "other revisions are not supported"),
    ("- 1\n- 2\n", ValueError, "expected a mapping of settings, got list"),
    ("max_length: [1\n", ValueError, "is not valid YAML"),
    ("max_lenght: 5\n", TypeError, "unknown arguments: max_lenght"),
    ("max_length: 5\nmax-length: 6\n", ValueError, "'max_length' is given twice"),
    ("1: 5\n", ValueError, "setting names must be text"),
    ("devices: gpu:x\n", ValueError, "devices: bad device list 'gpu:x'"),
    ("devices: 3\n", ValueError, "devices must be text"),
    ("max_length: 0\n", ValueError, "max_length must be positive"),
])
def test_bad_files_are_named(tmp_path, text, error, needle):
    with pytest.raises(error, match=needle.replace("(", r"\(").replace("[", r"\[")):
        PipelineConfig(config_file=_write(tmp_path, text))


def test_values_take_the_conversions_of_max_config_files(tmp_path):
    path = _write(tmp_path, "max_length: '64'\nenable_prefix_caching: 'false'\nenable_structured_output: 'no'\n"
                            "device_memory_utilization: '0.5'\nmax_batch_size: 4.0\nweight_path: w.gguf\n"
                            "use_vendor_blas: false\ncache_strategy: PAGED\nprofiling:\n  gpu_profiling: 'on'\n")
    config = PipelineConfig(config_file=path, model_path="m.gguf")
    assert (config.max_length, config.max_batch_size, config.use_vendor_blas) == (64, 4, "false")
    kv = config.model.kv_cache
    assert (kv.enable_prefix_caching, kv.device_memory_utilization, kv.cache_strategy.value) == (False, 0.5, "paged")
    assert config.sampling.enable_structured_output is False and config.profiling.gpu_profiling == "on"
    assert [str(p) for p in config.model.weight_path] == ["w.gguf"]


def test_a_file_model_name_does_not_beat_a_given_model_path(tmp_path):
    path = _write(tmp_path, "model_name: from_file.gguf\n")
    assert PipelineConfig(config_file=path).model.model_path == "from_file.gguf"
    assert PipelineConfig(config_file=path, model_path="mine.gguf").model.model_path == "mine.gguf"
    assert PipelineConfig(config_file=path, model_name="mine.gguf").model.model_path == "mine.gguf"


def test_an_alias_bomb_gives_a_short_error(tmp_path):
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    levels += [f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]"
               for p, c in zip("abcdefgh", "bcdefghi")]
    path = _write(tmp_path, "s:\n" + "".join(f"  {line}\n" for line in levels) + "devices: *i\n")
    with pytest.raises(ValueError) as info:
        PipelineConfig(config_file=path)
    assert "devices must be text" in str(info.value) and len(str(info.value)) < 1000


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
    text = sub.format_help()
    assert "CONFIG__" not in text and "PipelineConfig." not in text
    _, config = _cli_config([command, "--model-path", "m.gguf", "--gpu-profiling", "detailed"])
    assert config.profiling.gpu_profiling == "detailed"


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
    (["--cache-strategy", "bogus"], "cache_strategy must be one of model_default, paged, got 'bogus'"),
    (["--vision-config-overrides", "[1]"], "expected a JSON object"),
    (["--max-num-steps", "x"], "max_num_steps must be an integer, got 'x'"),
    (["--in-dtype", "float7"], "in_dtype must be a dtype name, got 'float7'"),
])
def test_bad_setting_flags(flags, needle):
    r = _max("generate", "--model-path", "m.gguf", "--prompt", "hi", *flags)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
