"""A model's config.json read into a ModelProfile: the two catalogue models give the catalogue's shape and, within
its rounding, its parameter counts (docs/hbm-fit.md); bad input names the field or the JSON line and column; the
safetensors index names its shards; weights listings name the first file a node has wrong."""

import json
from pathlib import Path

import pytest

from apps.deployments.topology.model_catalog import CATALOG
from apps.deployments.topology.model_config import ModelConfigError, index_files, model_config_read
from apps.deployments.topology.spec import ModelProfile
from apps.deployments.topology.weights_listing import weights_listing_differences

# Written from the models' public config.json (huggingface.co/Qwen/Qwen3-235B-A22B, .../deepseek-ai/DeepSeek-R1), the
# files model_catalog's comments and docs/hbm-fit.md cite.
SAMPLES = Path(__file__).parent / "samples"
SHAPE = ("layers", "kv_heads", "head_dim", "dtype", "attention_heads", "kv_layout", "experts", "hidden_size",
         "max_position")
ROUNDING = 0.05  # the catalogue writes 227.09 / 653.9 / 2.0 for the derived 227.10 / 653.91 / 1.96


def config(name: str) -> str:
    return (SAMPLES / f"{name}.config.json").read_text()


def edited(name: str, **changes) -> str:
    data = json.loads(config(name))
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return json.dumps(data)


@pytest.mark.parametrize("name", ["qwen3-235b-a22b", "deepseek-r1"])
def test_config_json_gives_the_catalogue_entry(name):
    reading = model_config_read(config(name), name=name)
    catalogue = ModelProfile(name=name, **CATALOG[name])
    assert {f: getattr(reading.profile, f) for f in SHAPE} == {f: getattr(catalogue, f) for f in SHAPE}
    assert reading.profile.kv_bytes_per_token == catalogue.kv_bytes_per_token
    for field in ("params_b", "expert_params_b", "unquantized_params_b"):
        assert getattr(reading.profile, field) == pytest.approx(getattr(catalogue, field), abs=ROUNDING), field
    assert reading.params_missing is None


def test_qwen_counts_are_the_hbm_fit_arithmetic():
    profile = model_config_read(config("qwen3-235b-a22b")).profile
    assert (profile.params_b, profile.expert_params_b, profile.unquantized_params_b) == (235.09, 227.1, 1.29)
    assert (profile.kv_layout, profile.weights) == ("mha", "bfloat16")


def test_deepseek_is_mla_and_its_published_checkpoint_is_fp8():
    reading = model_config_read(config("deepseek-r1"))
    assert (reading.model_type, reading.profile.kv_layout, reading.profile.kv_heads, reading.profile.head_dim) == \
        ("deepseek_v3", "mla", 1, 512 + 64)
    # The catalogue's deepseek-r1 loads BF16 (vllm-ascend has no FP8 matmul); the checkpoint itself is FP8.
    assert reading.profile.weights == "fp8"
    assert reading.profile.params_b == 671.03


def test_w8a8_weights_keep_kv_b_proj_unquantized():
    profile = model_config_read(edited("deepseek-r1", quantization_config=None, quantize="w8a8")).profile
    assert profile.weights == "w8a8"
    assert profile.unquantized_params_b == pytest.approx(CATALOG["deepseek-r1-w8a8"]["unquantized_params_b"],
                                                         abs=ROUNDING)


def test_a_dense_gqa_model_without_head_dim_divides_hidden_by_heads():
    text = json.dumps({"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                       "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                       "torch_dtype": "bfloat16", "tie_word_embeddings": False})
    profile = model_config_read(text).profile
    assert (profile.head_dim, profile.kv_heads, profile.experts, profile.max_position) == (128, 8, None, None)
    assert profile.params_b == 8.03  # Llama-3-8B's shape: 32 layers x 218.1M + 1.05B embeddings and lm_head


@pytest.mark.parametrize(("removed", "missing"), [
    ("vocab_size", "vocab_size"), ("moe_intermediate_size", "moe_intermediate_size")])
def test_counts_that_cannot_be_derived_are_none_naming_the_field(removed, missing):
    reading = model_config_read(edited("qwen3-235b-a22b", **{removed: None}))
    assert reading.profile.params_b is None and reading.params_missing == missing
    assert reading.profile.layers == 94  # the shape is still read


def test_deepseek_without_the_dense_layers_width_names_intermediate_size():
    assert model_config_read(edited("deepseek-r1", intermediate_size=None)).params_missing == "intermediate_size"


@pytest.mark.parametrize(("changes", "field"), [
    ({"num_hidden_layers": None}, "num_hidden_layers"),
    ({"num_attention_heads": "64"}, "num_attention_heads"),
    ({"torch_dtype": None}, "torch_dtype"),
    ({"torch_dtype": "int4"}, "torch_dtype"),
    ({"head_dim": None, "hidden_size": 4100}, "head_dim"),
    ({"quantization_config": {"quant_method": "awq"}}, "quantization_config.quant_method"),
    ({"vocab_size": -1}, "vocab_size"),
])
def test_bad_fields_are_errors_naming_the_field(changes, field):
    with pytest.raises(ModelConfigError) as caught:
        model_config_read(edited("qwen3-235b-a22b", **changes))
    assert caught.value.field == field and field in str(caught.value)


def test_qk_rope_head_dim_is_required_with_kv_lora_rank():
    with pytest.raises(ModelConfigError, match="qk_rope_head_dim"):
        model_config_read(edited("deepseek-r1", qk_rope_head_dim=None))


def test_bad_json_names_line_and_column():
    text = config("qwen3-235b-a22b").replace('"hidden_size": 4096,', '"hidden_size": 4096,,')
    with pytest.raises(ModelConfigError) as caught:
        model_config_read(text)
    assert (caught.value.line, caught.value.column) == (12, 23)
    assert "line 12 column 23" in str(caught.value)


INDEX = json.dumps({"metadata": {"total_size": 470000000000}, "weight_map": {
    "lm_head.weight": "model-00118-of-00118.safetensors", "model.embed_tokens.weight": "model-00001-of-00118.safetensors",
    "model.norm.weight": "model-00118-of-00118.safetensors"}}, indent=2)


def test_index_files_and_total_size():
    assert index_files(INDEX) == {"model-00001-of-00118.safetensors", "model-00118-of-00118.safetensors"}
    assert model_config_read(config("qwen3-235b-a22b"), INDEX).checkpoint_bytes == 470000000000


@pytest.mark.parametrize(("text", "field"), [
    ('{"metadata": {}}', "weight_map"),
    ('{"weight_map": {"a": "../x.safetensors"}}', "weight_map.a"),
    ('{"weight_map": {"a": "x"}, "metadata": {"total_size": "big"}}', "metadata.total_size"),
])
def test_bad_index_names_the_field(text, field):
    with pytest.raises(ModelConfigError) as caught:
        index_files(text)
    assert caught.value.field == field


def test_bad_index_json_names_the_line():
    with pytest.raises(ModelConfigError) as caught:
        index_files('{"weight_map": {\n  "a": "x"\n')
    assert caught.value.line == 3


def test_weights_listing_names_the_first_differing_file_against_the_majority():
    good = {"config.json": 900, "model-00001.safetensors": 5000, "model-00002.safetensors": 4000}
    listings = {"node0": good, "node1": dict(good), "node2": {**good, "model-00001.safetensors": 4999},
                "node3": {k: v for k, v in good.items() if k != "model-00002.safetensors"} | {"zz.bin": 1},
                "node4": dict(good)}
    found = {d.node: d for d in weights_listing_differences(listings)}
    assert list(found) == ["node2", "node3"]
    assert (found["node2"].file, found["node2"].kind, found["node2"].expected_size) == \
        ("model-00001.safetensors", "size", 5000)
    assert (found["node3"].file, found["node3"].kind) == ("model-00002.safetensors", "missing")
    assert found["node3"].message == "node3 lacks model-00002.safetensors (4000 bytes on node0, node1, node4)"


def test_weights_listing_without_a_majority_compares_with_the_first_node():
    tied = {"a": {"x": 1}, "b": {"x": 1}, "c": {"x": 2}, "d": {"x": 2}}
    assert [(d.node, d.reference) for d in weights_listing_differences(tied)] == [("c", ("a",)), ("d", ("a",))]
    differences = weights_listing_differences({"a": {"x": 1}, "b": {"x": 1, "y": 2}})
    assert [(d.node, d.reference, d.file, d.kind) for d in differences] == [("b", ("a",), "y", "extra")]
    assert weights_listing_differences({"a": {"x": 1}, "b": {"x": 1}}) == ()
