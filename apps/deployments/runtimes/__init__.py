"""How a deployment's planned processes run: started, stopped, found, read, their logs tailed and their files placed."""
