"""What a shop offers the agent: the tool registry and catalogue, the ``CommerceBackend``
protocol and its domain records, and what a handler receives (``ToolContext``).

It never imports the loop, the runtime, storage or a face: tools are data and handlers.
"""
