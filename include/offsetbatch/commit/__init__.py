"""The commit: the manifest check, the ledger transaction, publication, ownership and rebuild."""
