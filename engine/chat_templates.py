"""The role-marker chat template of the bundled model and the test checkpoints, with tools.

`<|role|>\\n{content}{eos}\\n` per message, as before. With `tools` it renders them the way Qwen's and
Hermes' templates do, without their instructions: a system turn listing each function's signature inside
<tools></tools>, calls written as <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>, results as
<tool_response> in a user turn. Without tools and tool turns it renders byte for byte what the plain
template did. Newlines sit inside string expressions: the renderer trims the one after a block tag.
"""

from __future__ import annotations

# Short on purpose: the bundled model's context holds 256 tokens, and its tokenizer spends about one token per
# JSON character. Calls are taught by constrained decoding (the service's structural tag), not by instructions.
TOOL_INSTRUCTIONS = "<tools>"
CALL_INSTRUCTIONS = "\\n</tools>"

ROLE_MARKER_TOOLS_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}{{ '<|system|>\\n' }}"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\\n\\n' }}{% endif %}"
    "{{ '" + TOOL_INSTRUCTIONS + "' }}"
    "{% for tool in tools %}{{ '\\n' + ((tool['function'] if tool['function'] is defined else tool) | tojson) }}{% endfor %}"
    "{{ '" + CALL_INSTRUCTIONS + "' + eos_token + '\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('unknown role ' + message['role']) }}{% endif %}"
    "{% if tools and loop.first and message['role'] == 'system' %}"
    "{% elif message['role'] == 'tool' %}"
    "{{ '<|user|>\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' + eos_token + '\\n' }}"
    "{% elif message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{ '<|assistant|>\\n' + message['content'] }}"
    "{% for call in message['tool_calls'] %}"
    "{{ '<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' "
    "+ (call['function']['arguments'] | tojson) + '}\\n</tool_call>' }}"
    "{% endfor %}{{ eos_token + '\\n' }}"
    "{% else %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
