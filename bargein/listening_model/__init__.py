"""A small learned model of "does this segment interrupt the agent?", fitted offline, evaluated with numpy."""
