"""All-reduce implementations that misbehave on purpose, loaded by import path as users load their own."""
