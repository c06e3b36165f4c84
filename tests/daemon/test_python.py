"""The llama8 Python package against a real daemon (test_python.sh starts
it): what it generates equals what llama8ctl, the C client, gets for the
same request; errors carry the daemon's codes; asyncio gives the same."""
import asyncio
import json
import os
import re
import subprocess

import pytest

import llama8

SOCK = os.environ["LLAMA8_SOCKET"]
CTL = os.environ["LLAMA8CTL"]
MODEL = os.environ["LLAMA8_TEST_MODEL"]


def ctl(*args, stdin=None):
    return subprocess.run([CTL, *args], input=stdin, capture_output=True, check=True,
                          text=True).stdout


@pytest.fixture
def client():
    with llama8.Client(SOCK) as c:
        yield c


def test_info(client):
    assert client.info["model_dir"] == os.path.realpath(MODEL)
    assert client.info["vocab_size"] == 128256
    assert client.info["eos_ids"]


def test_generate_equals_llama8ctl(client):
    want = ctl("generate", "--max-new", "24", "Say hi")
    st = client.generate("Say hi", max_new=24)
    toks = list(st)
    assert "".join(t.text for t in toks) + "\n" == want
    assert st.reason == "length" and st.tokens == 24 == len(toks)
    assert [t.index for t in toks] == list(range(24))
    assert st.prompt_tokens and st.prompt_tokens > 3


def test_system_and_chat_equal_llama8ctl(client):
    want = ctl("generate", "--max-new", "16", "--system", "Be brief.", "Say hi")
    assert client.generate("Say hi", system="Be brief.", max_new=16).text() + "\n" == want
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again"}]
    want = ctl("generate", "--max-new", "16", "--messages", stdin=json.dumps(msgs))
    assert client.chat(msgs, max_new=16).text() + "\n" == want


def test_ids_and_tokenizer(client):
    text = "Shared memory, rings and io_uring: <|eot_id|> as text. ünïcödé ✓"
    ids = client.tokenize(text)
    assert ids == [int(i) for i in ctl("tokenize", "-t", MODEL, "--no-special", text).split()]
    assert client.detokenize(ids) == text
    special = client.tokenize("<|eot_id|>", special=True)
    assert len(special) == 1 and special[0] in client.info["eos_ids"] + [128009]
    toks = list(client.generate(ids, max_new=8, temperature=0.8, seed=3, logprobs=True))
    assert len(toks) == 8 and all(t.logprob is not None and t.logprob <= 0 for t in toks)
    again = [t.id for t in client.generate(ids, max_new=8, temperature=0.8, seed=3)]
    assert again == [t.id for t in toks]


def test_two_streams_read_in_any_order(client):
    want = client.generate("Say hi", max_new=20).text()
    a = client.generate("Say hi", max_new=20)
    b = client.generate("Say hi", max_new=20)
    assert b.text() == want
    assert a.text() == want


def test_regex_constraint(client):
    st = client.generate("Give a code", regex="[A-Z]{3}-[0-9]{2}", max_new=32)
    out = st.text()
    assert re.fullmatch("[A-Z]{3}-[0-9]{2}", out), out
    assert st.reason in ("grammar", "eos")     # eos: allowed once the reply is whole
    assert out + "\n" == ctl("generate", "--max-new", "32", "--regex", "[A-Z]{3}-[0-9]{2}",
                              "Give a code")


def test_errors_carry_the_daemons_codes(client):
    with pytest.raises(llama8.Error) as e:
        list(client.generate("Say hi", max_new=0))
    assert e.value.name == "BAD_PARAMS" and e.value.code == 4 and e.value.message
    with pytest.raises(llama8.Error) as e:
        list(client.generate([1, 2, client.info["vocab_size"] + 7], max_new=4))
    assert e.value.name == "BAD_TOKEN"
    with pytest.raises(llama8.Error) as e:
        client.generate("x", regex="(unclosed", max_new=4).text()
    assert e.value.name == "BAD_GRAMMAR" and "column" in e.value.message
    with pytest.raises(TypeError):
        client.generate("x", temprature=1)
    with pytest.raises(llama8.Error):
        client.chat([{"role": "narrator", "content": "x"}])
    # The connection is still good.
    assert client.generate("Say hi", max_new=2).text() is not None


def test_cancel(client):
    st = client.generate("Say hi", max_new=2000, ignore_eos=True)
    first = next(st)
    assert first.index == 0
    st.cancel()
    rest = list(st)
    assert st.reason == "cancelled" and len(rest) < 1999


def test_status(client):
    before = client.status()
    client.generate("Say hi", max_new=3).text()
    s = client.status()
    assert s["model_name"] == client.info["model_name"] and s["backend"] == "cpu"
    assert s["requests_done"] >= before["requests_done"] + 1
    j = json.loads(ctl("status", "--json"))
    assert j["pages_total"] == s["pages_total"] and j["page_size"] == s["page_size"]


def test_no_daemon():
    with pytest.raises(llama8.Error) as e:
        llama8.Client(os.path.join(os.path.dirname(SOCK), "nobody.sock"))
    assert e.value.name in ("ENOENT", "ECONNREFUSED") and "nobody.sock" in str(e.value)


def test_asyncio_equals_sync(client):
    want = client.generate("Say hi", max_new=24).text()

    async def run():
        async with llama8.AsyncClient(SOCK) as ac:
            a = await ac.generate("Say hi", max_new=24)
            b = await ac.chat([{"role": "user", "content": "Say hi"}], max_new=24)
            ta, tb = await asyncio.gather(collect(a), collect(b))
            return ta, tb

    async def collect(it):
        return "".join([t.text async for t in it])

    ta, tb = asyncio.run(asyncio.wait_for(run(), 60))
    assert ta == want and tb == want
