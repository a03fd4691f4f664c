"""Training checks: schedules, normalisation, dropout, padding embedding and a few optimiser steps."""
