import subprocess
import sys
import textwrap

from repro import shim


def test_pinned_transformers_lacks_attributes_and_shim_adds_them(tiny_config):
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention

    shim.apply()
    attention = GPTNeoXAttention(tiny_config, layer_idx=0)
    assert attention.hidden_size == tiny_config.hidden_size
    assert attention.num_attention_heads == tiny_config.num_attention_heads
    assert shim.is_active()


def test_shim_is_a_noop_for_a_class_that_has_the_attributes():
    class Attention:
        hidden_size = 7
        num_attention_heads = 3

    assert shim.apply_to(Attention) == []
    assert Attention.hidden_size == 7 and Attention.num_attention_heads == 3


def test_instance_assignment_wins_over_config():
    class Config:
        hidden_size, num_attention_heads = 64, 4

    class Attention:
        def __init__(self):
            self.config = Config()
            self.hidden_size = 32  # older Transformers set it in __init__

    assert shim.apply_to(Attention) == ["hidden_size", "num_attention_heads"]
    a = Attention()
    assert a.hidden_size == 32 and a.num_attention_heads == 4


def test_pth_install_patches_lazily_without_importing_torch(tmp_path):
    pth = shim.install_pth(str(tmp_path))
    assert pth.read_text() == shim.pth_line()
    code = textwrap.dedent(f"""
        import site, sys
        site.addsitedir({str(tmp_path)!r})
        assert "torch" not in sys.modules, "the shim hook imported torch at start-up"
        assert "repro" not in sys.modules, "the shim hook must not pin the repro package at start-up"
        from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention
        assert isinstance(GPTNeoXAttention.__dict__["hidden_size"], property)
        assert isinstance(GPTNeoXAttention.__dict__["num_attention_heads"], property)
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_hook_loaded_twice_installs_once_and_does_not_recurse(tmp_path):
    line = shim.pth_line()
    code = textwrap.dedent(f"""
        import sys
        exec({line!r})
        exec({line!r})  # a venv can process the same .pth twice (lib and lib64)
        import repro.shim
        repro.shim.install_import_hook()
        assert sum(getattr(f, "repro_shim", False) for f in sys.meta_path) == 1
        from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention
        assert isinstance(GPTNeoXAttention.__dict__["hidden_size"], property)
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
