"""Server-rendered pages of the API: the Decisions page, where people answer what their runs ask."""
