"""`cglint server`: the checker as a Language Server Protocol server, for editors.

index.py keeps the project's findings and checks edited buffers against them (no pygls
needed); diagnostics.py and actions.py turn findings into LSP objects; server.py wires
them to pygls.
"""
