"""SQL front end: parsing, catalog, name resolution, logical plans."""
