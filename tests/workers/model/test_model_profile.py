"""ModelProfile: reasoning markers and tool-call format, detected or declared, and open think blocks."""

from __future__ import annotations

import pytest

from workers.model.model_profile import ModelProfile, detect_profile

THINKING = ModelProfile("m", 100, reasoning_start="<think>", reasoning_end="</think>")


def test_smollm2_profile(smollm2):
    profile = smollm2.profile
    assert (profile.name, profile.context_length) == ("SmolLM2-135M-Instruct", 8192)
    assert (profile.reasoning_start, profile.reasoning_end) == ("<think>", "</think>")
    assert profile.tool_call_format is None
    assert profile.default_chat_template_kwargs == {"enable_thinking": False}


@pytest.mark.parametrize(
    ("prompt", "opens"),
    [
        ("<|im_start|>assistant\n<think>\n", True),
        ("<|im_start|>assistant\n", False),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        ("<think>old</think>answer<|im_end|><|im_start|>assistant\n<think>\n", True),
        ("<think>old</think>answer<|im_end|><|im_start|>assistant\n", False),
    ],
)
def test_prompt_opens_reasoning(prompt, opens):
    assert THINKING.prompt_opens_reasoning(prompt) is opens


def test_a_profile_without_markers_never_opens_reasoning():
    profile = ModelProfile("m", 100)
    assert not profile.supports_reasoning
    assert not profile.prompt_opens_reasoning("<think>")


def test_markers_come_in_pairs():
    with pytest.raises(ValueError, match="together"):
        ModelProfile("m", 100, reasoning_start="<think>")
    with pytest.raises(ValueError, match="context_length"):
        ModelProfile("m", 0)


def test_detection_from_vocabulary_and_template(tiny):
    profile = tiny.loaded.profile
    assert profile.name == tiny.directory.name
    assert profile.context_length == tiny.config["max_position_embeddings"]
    if tiny.config["model_type"] == "qwen3":
        # <think> and </think> are tokens of the tiny Qwen3 vocabulary, as in the real one.
        assert (profile.reasoning_start, profile.reasoning_end) == ("<think>", "</think>")
        # The tiny template names <tool_call> but writes no assistant's call: spate writes
        # the tools and calls out itself (hermes) rather than lose them from the history.
        assert profile.tool_call_format is None
        closed = tiny.loaded.chat_template.render(
            [{"role": "user", "content": "hi"}], enable_thinking=False
        )
        assert not profile.prompt_opens_reasoning(closed)
    else:
        assert profile.reasoning_start is None and profile.tool_call_format is None


def test_markers_found_in_the_template_alone():
    template = "{{ messages[0]['content'] }}<think>{{ x }}</think>"
    profile = detect_profile("m", 10, vocab={"a": 0}, chat_template=template)
    assert (profile.reasoning_start, profile.reasoning_end) == ("<think>", "</think>")
    assert detect_profile("m", 10, vocab={"a": 0}, chat_template="plain").reasoning_start is None


def test_generation_config_gives_the_default_sampling() -> None:
    from workers.model.model_profile import detect_profile

    profile = detect_profile("m", 128, {}, None, {"temperature": 0.6, "top_p": 0.95, "do_sample": True,
                                                    "top_k": 20, "eos_token_id": 2})
    assert dict(profile.default_sampling) == {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
