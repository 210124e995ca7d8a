# Install rules for the core and CPack components (filled in by the foundation work).
