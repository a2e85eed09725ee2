"""The KG: tables on disk (DuckDB), the stores behind the KGView interface, loaders, validation, linking."""
