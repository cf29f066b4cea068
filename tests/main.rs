mod spec;
