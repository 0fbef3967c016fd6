"""Hosts, credentials, vLLM servers, GPUs, reports and samples, plus the agent ingest API."""
