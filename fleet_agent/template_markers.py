"""Markers of a chat template: which tool-call markup and reasoning tags it renders.

The agent reads the server's chat template (``fleet_agent/ondisk.py``) and sends only its
hash, size and the names of the markers below that occur in it, never its text. A marker is
a fixed name for one piece of markup a vLLM tool-call or reasoning parser looks for in the
model's output; the dashboard checks the server's ``--tool-call-parser`` and
``--reasoning-parser`` against them (``audit/kb/template_parsers.py``). The vocabulary is
documented in ``docs/agent.md`` and ``docs/wire-contract.md``; a new marker is a contract
extension (old dashboards ignore names they do not know).

Sources of the strings: the start tokens of vLLM's parser classes
(``vllm/entrypoints/openai/tool_parsers/*.py`` in 0.11.0, ``vllm/tool_parsers/*.py`` and
``vllm/reasoning/*.py`` in 0.15.1-0.32.0): hermes ``<tool_call>``, qwen3_coder/seed_oss
``<function=``/``<parameter=``, glm4_moe ``<arg_key>``, minimax_m2 ``<minimax:tool_call>``
``<invoke name=``, minimax/jamba ``<tool_calls>``, mistral ``[TOOL_CALLS]``, llama3_json
``<|python_tag|>``, llama4_pythonic ``<|python_start|>``, kimi_k2
``<|tool_calls_section_begin|>``, deepseek_v3/v31 ``<｜tool▁calls▁begin｜>``, granite
``<|tool_call|>``, seed_oss ``<seed:tool_call>``/``<seed:think>``, reasoning parsers
``<think>``, mistral ``[THINK]``, gpt-oss harmony ``<|channel|>``.
"""

from __future__ import annotations

import re

#: Marker name -> pattern searched in the template text. Tool-call markup first, then
#: reasoning. Keep names stable: they are part of the wire contract.
TOOL_MARKERS: dict[str, re.Pattern[str]] = {
    # <tool_call> wrapping a JSON object with "name" and "arguments" (Hermes, Qwen2.5/Qwen3).
    "tool_call_tag": re.compile(r"<tool_call>"),
    "tool_call_json": re.compile(r"""\\?["']arguments\\?["']\s*:"""),
    # Qwen3-Coder / Seed-OSS XML: <function=NAME><parameter=KEY>value</parameter>.
    "function_xml": re.compile(r"<function="),
    "parameter_xml": re.compile(r"<parameter="),
    # GLM-4.5/4.6/4.7: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>.
    "arg_key_xml": re.compile(r"<arg_key>"),
    # MiniMax-M2: <minimax:tool_call><invoke name="..."><parameter name="...">.
    "minimax_tool_call": re.compile(r"<minimax:tool_call>"),
    "invoke_xml": re.compile(r"<invoke name="),
    # MiniMax-M1 / Jamba: <tool_calls>[JSON...]</tool_calls>.
    "tool_calls_tag": re.compile(r"<tool_calls>"),
    "seed_tool_call": re.compile(r"<seed:tool_call>"),
    "mistral_tool_calls": re.compile(r"\[TOOL_CALLS\]"),
    # Llama 3.x JSON: {"name": ..., "parameters": ...}; built-in tools after <|python_tag|>.
    "json_name_parameters": re.compile(r"""\\?["']parameters\\?["']\s*:"""),
    "python_tag": re.compile(r"<\|python_tag\|>"),
    # Pythonic calls: [func_name(arg=value, ...)] (Llama 3.2/4 pythonic, Gemma 3, Olmo 3).
    "pythonic_calls": re.compile(r"\[\s*func_name\d?\s*\("),
    "python_start": re.compile(r"<\|python_start\|>"),
    "kimi_tool_tokens": re.compile(r"<\|tool_calls?_section_begin\|>|<\|tool_call_begin\|>"),
    "deepseek_tool_tokens": re.compile("<\uff5ctool\u2581calls?\u2581begin\uff5c>"),
    # DeepSeek-V3 (not V3.1): arguments in a ```json fence after the function name.
    "fenced_json_args": re.compile(r"```json"),
    "granite_tool_call": re.compile(r"<\|tool_call\|>"),
    # gpt-oss harmony: messages on channels, calls addressed "to=functions.NAME".
    "harmony_channel": re.compile(r"<\|channel\|>"),
}

REASONING_MARKERS: dict[str, re.Pattern[str]] = {
    "think_tag": re.compile(r"</?think>"),
    "enable_thinking": re.compile(r"\benable_thinking\b"),
    "reasoning_effort": re.compile(r"\breasoning_effort\b"),
    "mistral_think": re.compile(r"\[/?THINK\]"),
    "seed_think": re.compile(r"</?seed:think>"),
}

#: Every marker name this agent can send (the wire contract's vocabulary), plus
#: ``think_prefilled``: the generation prompt opens a ``<think>`` block the model continues.
VOCABULARY: tuple[str, ...] = (*TOOL_MARKERS, *REASONING_MARKERS, "think_prefilled")

_GEN_BLOCK = re.compile(r"\{%-?\s*if\s+add_generation_prompt\b(.*?)\{%-?\s*endif", re.S)
_LITERAL = re.compile(r"""'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)\"""", re.S)


def think_prefilled(text: str) -> bool:
    """True when the generation-prompt block emits an opening ``<think>`` that it does not
    close in the same string literal (the model starts inside its reasoning and emits only
    ``</think>``). An empty ``<think></think>`` pair (thinking switched off) does not count.
    """
    for block in _GEN_BLOCK.findall(text):
        for single, double in _LITERAL.findall(block):
            literal = single or double
            if "<think>" in literal and "</think>" not in literal.split("<think>")[-1]:
                return True
    return False


def extract(content: bytes | str) -> list[str]:
    """The sorted marker names found in a chat template's text (bytes decoded as UTF-8 with
    replacement). Never raises; an empty list when the template holds none of them."""
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
    found = [name for name, pattern in {**TOOL_MARKERS, **REASONING_MARKERS}.items()
             if pattern.search(text)]
    if "tool_call_json" in found and "tool_call_tag" not in found:
        found.remove("tool_call_json")  # "arguments": outside <tool_call> is another format
    if think_prefilled(text):
        found.append("think_prefilled")
    return sorted(found)
