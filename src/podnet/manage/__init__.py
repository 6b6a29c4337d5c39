"""What ``podnetctl network``, ``podnetctl config`` and the REST API run: load a network
and dispatch to its type's backend; the server config."""
