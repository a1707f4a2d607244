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
