"""`commprof explain`: which box condition makes the observed collectives slower than the cost model predicts,
ranked within the model's error, each with what the box's records say of it and the doctor's fix."""
