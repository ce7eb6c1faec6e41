"""Bridges: sessionstore as the session backend of other agent frameworks.

Each framework has its own subpackage, installed through an extra of the same name, and imports its
framework only there, so ``import sessionstore`` never needs one:

- ``sessionstore.bridges.openai_agents``: the OpenAI Agents SDK ``Session`` (extra ``openai-agents``)
- ``sessionstore.bridges.adk``: Google ADK's ``BaseSessionService`` (extra ``adk``)
- ``sessionstore.bridges.langgraph``: LangGraph's checkpointer (extra ``langgraph``)

Claude Code's own transcripts are bridged by ``sessionstore.claude_code`` (import, export, follow).
"""
