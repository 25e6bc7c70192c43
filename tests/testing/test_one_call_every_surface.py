"""One factory, one call, one verdict: the pytest items, `tensorcad certify --model` and MCP `certify` agree.

Two factories make the same tiny random Llama, one with ``config.use_cache``
on (what ``save_pretrained`` writes), one with it off. Each is certified under
a call (``tensorcad.hf.calls``): ``plain`` (``model(**batch)``, the config's
own cache) and ``trainer`` (``use_cache=False``, as transformers' Trainer
sets it). The expected verdict is computed first, here, by transformers'
forward: the packed row called that way against each document run alone. Each
surface must give that verdict and name that call.
"""

from __future__ import annotations

import asyncio
import json

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

FACTORIES = """
    import torch
    import transformers


    def _llama(use_cache):
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                          max_position_embeddings=256, attn_implementation="sdpa")
        config.use_cache = use_cache
        torch.manual_seed(0)
        return transformers.LlamaForCausalLM(config)


    def cache_on():
        return _llama(True)


    def cache_off():
        return _llama(False)
"""
SMALL = ("--seq", "64", "--pack", "16")


def _llama(use_cache: bool):
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      attn_implementation="sdpa")
    config.use_cache = use_cache
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def leaks(use_cache: bool, call: str) -> bool:
    """Independent of the code under test: two packed documents called as ``call`` against each alone."""
    model = _llama(use_cache)
    lengths = (20, 30)
    ids = torch.randint(0, 128, (1, sum(lengths)), generator=torch.Generator().manual_seed(1))
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    extra = {"use_cache": False} if call == "trainer" else {}  # the Trainer writes use_cache=False to the config
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=positions, **extra).logits
        alone = model(input_ids=ids[:, lengths[0]:], use_cache=False).logits
    return float((packed[:, lengths[0]:] - alone).abs().max()) > 1e-4


@pytest.fixture
def project(pytester):
    pytester.makepyfile(tiny_factories=FACTORIES)
    pytester.syspathinsert()
    return pytester


def by_pytest(project, factory: str, call: str) -> tuple[bool, set[str]]:
    project.makefile(".ini", pytest=f"[pytest]\ntensorcad_models = tiny_factories:{factory}\n"
                                    f"tensorcad_call = {call}\n")
    result = project.runpytest("-p", "no:cacheprovider", "--no-tensorcad-subprocess", "--tensorcad-seq", "64",
                               "--tensorcad-pack", "16")
    reports = [r for r in result.reprec.getreports("pytest_runtest_logreport") if r.when == "call"]
    assert len(reports) == 9, result.stdout.str()
    calls = {value for r in reports for key, value in r.user_properties if key == "tensorcad_call"}
    return all(r.passed for r in reports), calls


def by_cli(factory: str, call: str, capsys) -> tuple[bool, set[str]]:
    from tensorcad.cli import main

    capsys.readouterr()  # what the pytest run printed
    code = main(["certify", "--model", f"tiny_factories:{factory}", "--call", call, *SMALL, "--json"])
    [report] = json.loads(capsys.readouterr().out)
    assert code == (0 if report["passed"] else 1)
    return report["passed"], {report["call"]}


def by_mcp(factory: str, call: str) -> tuple[bool, set[str]]:
    pytest.importorskip("mcp")
    import mcp

    from tensorcad.mcp import build_server

    async def session():
        async with mcp.Client(build_server()) as client:
            return await client.call_tool("certify", {"model": f"tiny_factories:{factory}", "call": call,
                                                      "seq": 64, "pack": 16.0})

    result = asyncio.run(session())
    assert not result.is_error, result.content[0].text
    report = result.structured_content
    return report["passed"], {report["call"]}


def one_call(project, capsys, factory: str, call: str) -> None:
    expected = not leaks(factory == "cache_on", call)
    verdicts = {"pytest": by_pytest(project, factory, call), "cli": by_cli(factory, call, capsys),
                "mcp": by_mcp(factory, call)}
    said = {surface: calls for surface, (_, calls) in verdicts.items()}
    assert {surface: passed for surface, (passed, _) in verdicts.items()} == dict.fromkeys(verdicts, expected)
    [line] = set.union(*said.values())  # one call named, the same on every surface
    assert all(len(calls) == 1 for calls in said.values()), said
    assert line.startswith(f"{call} (")
    cache = "use_cache=False passed" if call == "trainer" else f"use_cache={factory == 'cache_on'} as the config says"
    assert cache in line


def test_the_reference_leaks_only_for_a_plain_call_with_the_cache_on():
    assert [leaks(cache, call) for cache in (True, False) for call in ("plain", "trainer")] == [
        True, False, False, False]


@pytest.mark.parametrize("factory", ["cache_on", "cache_off"])
def test_a_plain_call_gets_one_verdict_and_one_named_call_on_every_surface(project, capsys, factory):
    one_call(project, capsys, factory, "plain")


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["cache_on", "cache_off"])
def test_the_trainers_call_gets_one_verdict_and_one_named_call_on_every_surface(project, capsys, factory):
    one_call(project, capsys, factory, "trainer")


def test_a_marker_call_overrides_the_ini_and_a_bad_one_is_a_usage_error(project):
    project.makefile(".ini", pytest="[pytest]\ntensorcad_call = plain\n")
    project.makepyfile(test_mine="""
        import pytest

        pytestmark = pytest.mark.tensorcad(model="tiny_factories:cache_on", seq=64, pack=16, call="trainer")

        def test_settings(tensorcad_settings):
            assert tensorcad_settings.call == "trainer"
    """)
    project.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    project.makefile(".ini", pytest="[pytest]\ntensorcad_call = sometimes\n")
    result = project.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tensorcad.call: unknown call 'sometimes' (calls: trainer, plain*"])
