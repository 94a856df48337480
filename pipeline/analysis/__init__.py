"""Analysis stages: attention maps, tables (aggregate), figures and the report."""
