"""Developer tool: vLLM releases as data (``audit/kb/data/vllm/<release>.json``).

``source`` reads a vLLM wheel or unpacked source tree statically (``ast``; vLLM and torch are
never imported); ``ground_truth`` converts the ground-truth JSON files; both hand the same
fact shapes to ``build.build_table``. Entry point: ``manage.py vllm_extract``.
"""
