"""The case: the program IR, case files and the values they may hold."""
