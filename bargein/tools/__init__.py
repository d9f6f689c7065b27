"""Built-in server-side tools (clock, calculator, unit conversion) and the registry that offers them to a model."""
