"""The probe core: recording, perturbing and measuring forwards of the model under test."""
