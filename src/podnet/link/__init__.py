"""Interfaces, addresses, routes, sysctls and network namespaces, through iproute2's ``ip``.

Commands are built as data (lists of ``ip -batch`` lines) by pure functions and executed with
one ``ip -batch -`` process per namespace, so an ADD starts two ``ip`` processes in all.
"""
