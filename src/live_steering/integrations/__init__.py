"""Steering inside agent frameworks, one module per framework, each behind its own extra.

* ``live_steering.integrations.amplifier``: an Amplifier orchestrator module (extra ``amplifier``).
* ``live_steering.integrations.pydantic_ai``: a pydantic-ai capability (extra ``pydantic-ai``).
* ``live_steering.integrations.openai_agents``: the OpenAI Agents SDK runner (extra ``openai-agents``).
* ``live_steering.integrations.langgraph``: LangGraph's ReAct agent and ``StateGraph`` (extra ``langgraph``).

This package imports no framework: only importing one of its modules does, and
without its extra that import fails with the ``pip install`` line that fixes it.
"""

__all__: list[str] = []  # the frameworks' modules are imported by name, each behind its extra
