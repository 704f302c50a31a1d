"""Tables, state enums and the store: the only code that writes Parkway's state."""
