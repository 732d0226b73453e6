"""The commands: each takes the resolved run (config.resolve) and the skill, dispatched from one table in
train_skill.py."""
