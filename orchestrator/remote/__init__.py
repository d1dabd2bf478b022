"""Remote data and weights (docs/remote-sources.md): fetched from the source a dossier item's `uri` names, with
a maintained client per scheme, checked against the item's sha256, kept in a content-addressed cache."""
