"""The kruntimes.io/v1alpha1 API: pydantic models for Run and Runtime, quantity and name rules."""
