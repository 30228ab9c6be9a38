"""What runs a check: the session (both kinds), the pipeline's steps, a decoder's plan and steps."""
