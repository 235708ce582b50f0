"""The pages of the Kafka Events view: one module per page, each a FastAPI router (HTML + JSON)."""
