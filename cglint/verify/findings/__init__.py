"""How what the verifier observes becomes a finding: the user's line (frames), the
observations (recorder), capture errors, and the rule codes and tables of the catalogue.

See docs/verify-internals.md.
"""
